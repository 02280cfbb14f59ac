"""What moto's DynamoDB lacks for the embedded stack: AWS's item size limit (:mod:`.item_size`)."""
